"""Every lookup and decision made before a run: a scenario's frozen plans and the limits on what a command may run."""
