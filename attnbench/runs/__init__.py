"""Jobs: one room per command that writes a run or checks the machine (kernel sweep, e2e grid, scenario, merge, doctor), and the run directory."""
