"""Pure-data configuration: pydantic models validated once, at load, and the one field-path
language over them (:mod:`simulator.config.paths`). No physics, no SimPy."""
