"""Planted issues for `sandboy audit run` (see ../README.md). Do not copy."""

import subprocess

PASSWORD = "hunter2"


def list_dir(user_input):
    return subprocess.call("ls " + user_input, shell=True)


def compute(expression):
    return eval(expression)
