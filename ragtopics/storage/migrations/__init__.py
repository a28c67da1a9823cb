"""Alembic migration scripts of the SQL metadata; run by :mod:`ragtopics.storage.migrate`."""
