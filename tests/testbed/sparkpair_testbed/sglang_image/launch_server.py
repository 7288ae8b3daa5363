"""Stand-in SGLang (sparkpair testbed): `python3 -m sglang.launch_server` runs the wheel's own
launcher, kept beside this file as launch_server_wheel.py, with only its run_server swapped for
the simulated one (simengine/sglang_launch.py says how)."""
from simengine.sglang_launch import main

main()
