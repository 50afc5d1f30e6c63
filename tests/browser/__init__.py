"""Browser tests: a real JupyterLab in headless Chromium (see conftest.py)."""
