"""Downstream of the engine: frozen records and the metrics derived from them."""
