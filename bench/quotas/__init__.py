"""Compute limits and shares."""
