from sparkpair.cli import run

run()
