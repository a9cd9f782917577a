"""Kernel families. A backend is one small file here plus one line in registry.py."""
