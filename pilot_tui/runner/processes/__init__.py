"""Fresh processes, the machinery: starting one that knows only its command line and the files it
names (`fresh_process`), ending with its parent (`lifetime`), the environment for reproducible CUDA
runs (`determinism`). What each one runs is in `runner/workers/`."""
