"""The engine: sampling, the repeat loop, records and results, the verdict statistics,
attribution and the bisection search.

It imports nothing from IPython, ipykernel, ipywidgets, bqplot or anywidget, and nothing from
the notebook layer; views follow a watch through :mod:`.observer`.
"""
