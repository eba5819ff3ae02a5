"""What the commands do with runs: compare, plan, sweep, validate, calibrate, measured runs, the demo."""
