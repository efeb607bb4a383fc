"""Alembic migrations of the app's schema: `forklift.app.database.upgrade` applies them at every start."""
