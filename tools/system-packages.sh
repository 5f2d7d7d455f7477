#!/usr/bin/env bash
# What the test suite drives outside Python, from Debian's packages, installed when missing:
# the README's second command runs this first, and so does .ci/run (its last line is that
# command). On a machine that has them all it does nothing.
set -euo pipefail

missing=""
need() {  # a program the suite runs (a path, or a name on PATH) and the Debian package that has it
  [ -e "$1" ] || command -v "$1" >/dev/null || missing="$missing $2"
}
# wb.testbed's emulated hosts (tests/test_testbed.py, test_hosts.py, ...): an sshd in a network
# namespace per host, links shaped by tc (workbench/kernel/testbed/bed.py checks the same)
need /usr/sbin/sshd openssh-server
need /usr/lib/openssh/sftp-server openssh-server
need /usr/bin/ssh openssh-client
need /usr/bin/ssh-keygen openssh-client
need /usr/sbin/tc iproute2
need /usr/bin/unshare util-linux
need /usr/bin/nsenter util-linux
# MPI and Slurm across those hosts (tests/test_launchers.py; testbed/slurm.py checks Slurm's)
need mpiexec openmpi-bin
need /usr/sbin/slurmctld slurm-wlm
need /usr/sbin/slurmd slurm-wlm
need /usr/bin/sbatch slurm-wlm
need /usr/sbin/munged munge
# the browser test (tests/test_browser.py; browsers cannot be downloaded here)
need chromium chromium

[ -n "$missing" ] || exit 0
missing=$(printf '%s\n' $missing | sort -u | tr '\n' ' ')
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "The test suite needs Debian's $missing(missing here); as root on Debian this script installs them:" \
       "apt-get install -y --no-install-recommends $missing" >&2
  exit 1
fi
# No daemon may start system-wide from the install (sshd would listen on every interface,
# munged and slurmd would start with the system's key and config): a policy-rc.d that
# refuses, for the install only, unless the machine has its own.
policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
echo "Installing Debian's $missing(tools/system-packages.sh)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
