#!/usr/bin/env bash
# Make sure a Chromium for the dashboard's browser test (tests/e2e/test_dashboard.py) is on this machine.
# Installs Debian's chromium and chromium-driver with apt-get when they are missing; does nothing when
# they are there. The test drives it with Playwright (executable_path): Playwright's own browser
# downloads are never used.
set -euo pipefail

have() {
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1
}

if have; then
  echo "browser: found $(command -v chromium) ($(chromium --version 2>/dev/null | head -n 1 || echo 'version unknown'))"
  exit 0
fi

echo "browser: missing, installing with apt-get (chromium, chromium-driver)"
. "$(dirname "$0")/apt.sh"
apt_prepare browser "install Chromium yourself so that 'chromium' is on PATH (the dashboard test uses it)"
$SUDO apt-get install -y -qq chromium chromium-driver \
  || { echo "browser: apt-get could not install chromium and chromium-driver (Debian's packages; on Ubuntu install Chromium yourself)" >&2; exit 1; }
have || { echo "browser: installed, but 'chromium' or 'chromedriver' is not on PATH" >&2; exit 1; }
echo "browser: installed $(command -v chromium)"
