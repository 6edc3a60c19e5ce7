"""Boards, emulated and real: the virtual board (sim, m3sim, m3board, runtimes), deployment (deploy, drive, romfs,
parts), the board at a port (board), the live monitor (monitor), the runtime's measured footprint (footprint),
a plan run on the emulated board (planrun) and the scripts that run on a board (board_scripts/)."""
