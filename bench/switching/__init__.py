"""Handing a GPU over: switch cost, swapping."""
