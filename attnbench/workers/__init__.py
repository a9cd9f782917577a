"""Running sweep points elsewhere: in worker processes now; other GPUs and machines later."""
