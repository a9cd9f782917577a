"""The jobs the commands run (a kernel sweep, an e2e grid, a scenario, a merge, doctor): the floor between cli and the domain."""
