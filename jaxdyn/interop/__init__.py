"""Bridges to other rigid-body libraries."""
