"""The baseline history: every result in a store, series per stage, change points, a gate.

Modules: :mod:`.schema` (tables and migrations), :mod:`.store` (SQLite / PostgreSQL on
SQLAlchemy Core), :mod:`.record` (what is kept of a result), :mod:`.series` (comparable series
and change points per metric), :mod:`.gate` (a new result against the last K baselines, judged
by :mod:`mlbaseline.comparison`), :mod:`.changepoints` (the detector).
"""
