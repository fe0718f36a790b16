"""The Attribution Service: a REST API (FastAPI) in front of the pipeline and the store.

`app.create_app` builds the application from values (settings, rule set, engine, tokens); `app.app_from_environment`
is the factory `attribution serve` hands to uvicorn. This package is the only place where errors become HTTP
statuses; nothing here does work at import time.
"""
