#!/usr/bin/env bash
# Refuses tracked files that do not belong in the repository: any file over
# 1 MiB, and any executable binary (an ELF, Mach-O or PE program, or a file
# with the executable bit that is not text). Build outputs go to bin/ (ignored);
# a binary committed once stays in every clone's history for good.
# Reads the index, not the working tree, so it checks what a commit would hold.
# `make lint` runs it.
#
#   scripts/check-tracked.sh [REPO]   (default: this repository)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
export LC_ALL=C

limit=$((1024 * 1024))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mode <TAB> sha <TAB> path, one line per tracked file (submodules left out).
git -c core.quotePath=false ls-files -s | awk -F'\t' '{split($1, a, " "); if (a[1] != "160000") print a[1] "\t" a[2] "\t" $2}' >"$tmp/files"
# git grep -I skips binary files, so the text files are the ones it lists; the
# rest (binary or empty) are the ones whose first bytes are looked at.
git -c core.quotePath=false grep --cached -I -l -e '' | sort >"$tmp/text" || true

bad=0
while IFS=$'\t' read -r mode sha path; do
	size=$(git cat-file -s "$sha")
	if [ "$size" -gt "$limit" ]; then
		echo "check-tracked: $path is $size bytes, over the 1 MiB limit" >&2
		bad=1
	fi
done < <(cut -f2 "$tmp/files" | git cat-file --batch-check='%(objectname) %(objectsize)' |
	awk -v limit="$limit" '$2 > limit {print $1}' | sort -u | join -t$'\t' -1 1 -2 2 -o 2.1,2.2,2.3 - <(sort -t$'\t' -k2,2 "$tmp/files"))

while IFS=$'\t' read -r mode sha path; do
	{ git cat-file blob "$sha" | head -c 8192 >"$tmp/head"; } 2>/dev/null || true
	[ -s "$tmp/head" ] || continue # empty
	magic=$(head -c 4 "$tmp/head" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedface | feedfacf | cafebabe | 4d5a*) kind="an executable binary" ;;
	*) if [ "$mode" = 100755 ]; then kind="an executable that is not text"; else kind=; fi ;;
	esac
	if [ -n "$kind" ]; then
		echo "check-tracked: $path is $kind; build outputs belong in bin/, not in git" >&2
		bad=1
	fi
done < <(sort -t$'\t' -k3,3 "$tmp/files" | join -t$'\t' -1 3 -2 1 -v 1 -o 1.1,1.2,1.3 - "$tmp/text")

if [ "$bad" != 0 ]; then
	echo "check-tracked: remove them from the index (git rm --cached PATH)" >&2
	exit 1
fi
