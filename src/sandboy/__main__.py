from sandboy.cli import entry

entry()
