#!/usr/bin/env bash
# Build forklift's images without any registry and save each as an OCI archive in build/images/:
#   deploy/images/build.sh serve [full] [app]      (make images: serve; make images-all: all three)
# 1. a Debian root filesystem from Debian's packages (mmdebstrap, the mirror apt is configured with), imported
#    once as localhost/debian-base:bookworm;
# 2. wheels of forklift and of what each image installs, built on the host (pip wheel: PyPI or pip's cache);
# 3. buildah build --network=none from deploy/images/Containerfile, one target per image;
# 4. buildah push to oci-archive:build/images/IMAGE.oci.tar, IMAGE one of forklift-serve, forklift, forklift-app.
# Needs podman, buildah, mmdebstrap (Debian packages) and the venv make creates.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/images/containers.conf}"
out=build/images
mkdir -p "$out"
python=${PYTHON:-.venv/bin/python}
version=$("$python" -c "import importlib.metadata as m; print(m.version('forklift'))")
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
base=localhost/debian-base:bookworm

say() { printf '%s  %s\n' "$(date +%T)" "$*" >&2; }

if ! podman image exists "$base"; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    say "base: mmdebstrap bookworm from ${mirror:-the default mirror}"
    # no manuals, translations or docs (the licences stay): they only weigh
    mmdebstrap --quiet --variant=minbase --dpkgopt=force-unsafe-io --include=python3,python3-venv,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --customize-hook='rm -rf "$1"/var/lib/apt/lists/*' \
        bookworm "$out/debian-bookworm.tar" ${mirror:+"$mirror"}
    podman import --quiet "$out/debian-bookworm.tar" "$base" >/dev/null
    rm -f "$out/debian-bookworm.tar"
fi

for image in "$@"; do
    case "$image" in
        serve) extras="" name=forklift-serve ;;
        full) extras="[all]" name=forklift ;;
        app) extras="[app]" name=forklift-app ;;
        *) echo "build.sh: $image: not an image (serve, full, app)" >&2; exit 2 ;;
    esac
    context="$out/context-$image"
    rm -rf "$context" && mkdir -p "$context/wheels" && cp deploy/images/healthcheck.py "$context/"
    say "$image: wheels of forklift$extras"
    "$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$context/wheels" ".$extras"
    digest=$(sha256sum "$context"/wheels/forklift-*.whl | cut -c1-64)
    say "$image: buildah build (no network)"
    started=$(date +%s)
    buildah build --quiet --network=none --format docker --layers=false --target "$image" \
        --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE_DIGEST="sha256:$digest" \
        --build-arg EXTRAS="$extras" -f deploy/images/Containerfile -t "localhost/$name:latest" \
        "$context" >/dev/null
    rm -rf "$context"
    archive="$out/$name.oci.tar"
    rm -f "$archive"
    buildah push --quiet "localhost/$name:latest" "oci-archive:$archive:latest"
    size=$(podman image inspect --format '{{.Size}}' "localhost/$name:latest")
    say "$image: localhost/$name:latest, $((size / 1000000)) MB, built in $(( $(date +%s) - started )) s; $archive"
done
