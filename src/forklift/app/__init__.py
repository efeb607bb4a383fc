"""`forklift app`: the web app for image analysts. FastAPI routes per resource (`routes/`), SQLAlchemy tables
(`tables.py`) migrated by Alembic (`migrations/`), files on disk under the data directory (`storage.py`),
accounts and sessions (`accounts.py`, `security.py`), and the built front end (`static/`, from `webapp/`)."""
