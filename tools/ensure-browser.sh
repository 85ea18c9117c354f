#!/usr/bin/env bash
# Make sure the browser test has a Chromium to drive, installing one where this script can.
#   1. a system Chromium (chromium, chromium-browser, google-chrome) is used as it is;
#   2. as root with apt-get: Debian's chromium, plus fonts-nanum so Hangul renders;
#   3. elsewhere: Playwright's own build (playwright install chromium; needs internet);
#   4. otherwise: one clear line saying what to install, and failure (CI never skips it).
# Usage: tools/ensure-browser.sh VENV_BIN
set -u
bin=${1:-.venv/bin}

system_browser() {
  for name in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
    [ -n "$name" ] && command -v "$name" >/dev/null 2>&1 && { command -v "$name"; return 0; }
  done
  return 1
}

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

if browser=$(system_browser); then
  # Without a Korean font every Hangul character is a box in the screenshots.
  if can_apt && command -v fc-list >/dev/null 2>&1 && [ -z "$(fc-list :lang=ko 2>/dev/null)" ]; then
    apt-get install -y -qq fonts-nanum >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq fonts-nanum; } >/dev/null 2>&1
  fi
  echo "browser: $browser"
  exit 0
fi

if can_apt; then
  echo "browser: installing Debian's chromium and fonts-nanum"
  if { apt-get update -qq && apt-get install -y -qq chromium fonts-nanum; } >/dev/null 2>&1 && browser=$(system_browser); then
    echo "browser: $browser"
    exit 0
  fi
fi

if "$bin/python" -m playwright install chromium >/dev/null 2>&1; then
  echo "browser: Playwright's own Chromium"
  exit 0
fi

echo "error: the browser test needs Chromium: install it (Debian/Ubuntu: 'apt-get install chromium fonts-nanum'; elsewhere: '$bin/python -m playwright install chromium') and run make test again" >&2
exit 1
