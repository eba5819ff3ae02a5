"""Pure-data configuration: pydantic models validated once, at load. No physics, no SimPy."""
