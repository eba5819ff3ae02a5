"""Closed forms on numpy: parameter counts, placement, step times, rooflines, cost and energy.

Pure functions of validated config objects; no SimPy, no randomness, no I/O.
"""
