"""PD1xx: the machine and the launch: GPU capabilities, processes, ports, launchers, job scripts and allocations."""
