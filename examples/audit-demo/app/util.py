"""Planted issues for Ruff (see ../README.md)."""

import os


def greet(name):
    return "hello " + nmae
