"""Revision scripts, one per schema change, named ``<4-digit revision>_<slug>.py``."""
