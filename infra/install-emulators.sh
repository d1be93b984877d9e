#!/usr/bin/env bash
# Make sure the official Pub/Sub and Firestore emulators (and a JDK) are on this machine.
# Installs them with apt-get when they are missing; does nothing when they are there.
set -euo pipefail

root=""
for c in "${CLOUDSDK_ROOT_DIR:-}" /usr/lib/google-cloud-sdk /usr/share/google-cloud-sdk /opt/google-cloud-sdk; do
  if [ -n "$c" ] && [ -d "$c/platform" ]; then root="$c"; break; fi
done
if [ -z "$root" ] && command -v gcloud >/dev/null 2>&1; then
  root="$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null || true)"
fi

have() {
  [ -n "$root" ] \
    && [ -x "$root/platform/pubsub-emulator/bin/cloud-pubsub-emulator" ] \
    && [ -x "$root/platform/cloud-firestore-emulator/cloud_firestore_emulator" ] \
    && command -v java >/dev/null 2>&1
}

if have; then
  echo "emulators: found under $root"
  exit 0
fi

echo "emulators: missing, installing with apt-get (google-cloud-cli-pubsub-emulator, google-cloud-cli-firestore-emulator, JDK 17)"
. "$(dirname "$0")/apt.sh"
apt_prepare emulators "install the Google Cloud CLI and its pubsub-emulator and cloud-firestore-emulator components (https://cloud.google.com/sdk/docs/install), and a JDK"
# The emulators come from Google's apt repository: add it (key and source) when apt does not know them.
if ! apt-cache show google-cloud-cli-pubsub-emulator >/dev/null 2>&1; then
  echo "emulators: adding the Google Cloud CLI apt repository (packages.cloud.google.com)"
  $SUDO apt-get install -y -qq ca-certificates curl gnupg
  curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | $SUDO gpg --dearmor --yes -o /usr/share/keyrings/cloud.google.gpg
  echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" \
    | $SUDO tee /etc/apt/sources.list.d/google-cloud-sdk.list >/dev/null
  $SUDO apt-get update -qq
fi
$SUDO apt-get install -y -qq openjdk-17-jre-headless google-cloud-cli-pubsub-emulator google-cloud-cli-firestore-emulator \
  || { echo "emulators: apt-get could not install them; see https://cloud.google.com/sdk/docs/install" >&2; exit 1; }
root=/usr/lib/google-cloud-sdk
have || { echo "emulators: installed, but not found under $root" >&2; exit 1; }
echo "emulators: installed under $root"
