"""The notebook floor: the ``%%leakwatch`` magics, click delivery while a cell runs, the
dashboard and its pipeline strip. It drives the engine and shows what it reports."""
