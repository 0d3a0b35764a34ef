"""Coordinators: consumer groups (group/) and, later, transactions."""
