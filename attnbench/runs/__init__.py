"""Jobs: one room per command that writes a run (kernel sweep, e2e grid, scenario, merge), and the run directory."""
