#!/usr/bin/env bash
# Installs what a fresh machine lacks for `make run` (PostgreSQL's server
# binaries) and, with --clients, for `make test` (the unmodified S3 clients the
# conformance suite drives: Debian's aws cli v2, rclone and s3cmd, HAProxy, chromium, nats-server, and
# @aws-sdk/client-s3 for Node), with --cluster for `make cluster` (HAProxy and
# PgBouncer), and with --chaos for `make chaos` (nats-server, the campaign's
# NATS JetStream notification target). Quiet when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=
apt_install() {
	if [ "$(id -u)" != 0 ]; then
		echo "ensure-deps: missing Debian packages: $*; install them (as root: apt-get install $*)" >&2
		exit 1
	fi
	if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	echo "ensure-deps: installing PostgreSQL server binaries"
	apt_install postgresql
fi

if [ "${1:-}" = --clients ] || [ "${1:-}" = --cluster ]; then
	pkgs=()
	# HAProxy balances the cluster stack's gateways; PgBouncer is the
	# transaction-mode pooler its tests put in front of PostgreSQL.
	command -v haproxy >/dev/null || pkgs+=(haproxy)
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || pkgs+=(pgbouncer)
	if [ ${#pkgs[@]} -gt 0 ]; then
		echo "ensure-deps: installing ${pkgs[*]}"
		apt_install "${pkgs[@]}"
	fi
fi

if [ "${1:-}" = --chaos ]; then
	command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || {
		echo "ensure-deps: installing nats-server"
		apt_install nats-server
	}
fi

if [ "${1:-}" = --clients ]; then
	pkgs=()
	[ -x /usr/bin/aws ] || pkgs+=(awscli)
	command -v rclone >/dev/null || pkgs+=(rclone)
	command -v s3cmd >/dev/null || pkgs+=(s3cmd)
	# HAProxy terminates TLS in front of a gateway in TestBehindHAProxy.
	command -v haproxy >/dev/null || pkgs+=(haproxy)
	# Debian's chromium, driven by chromedp in TestBrowserUploads.
	command -v chromium >/dev/null || pkgs+=(chromium)
	# NATS JetStream, a notification target in TestNotifyNATS*.
	command -v nats-server >/dev/null || pkgs+=(nats-server)
	if [ ${#pkgs[@]} -gt 0 ]; then
		echo "ensure-deps: installing ${pkgs[*]}"
		apt_install "${pkgs[@]}"
	fi
	if [ ! -d conformance/clients/node/node_modules ]; then
		if ! command -v npm >/dev/null; then
			echo "ensure-deps: npm is missing (Node.js 20 with npm runs the @aws-sdk/client-s3 tests)" >&2
			exit 1
		fi
		echo "ensure-deps: npm ci in conformance/clients/node"
		(cd conformance/clients/node && npm ci --no-audit --no-fund --loglevel=error)
	fi
fi
