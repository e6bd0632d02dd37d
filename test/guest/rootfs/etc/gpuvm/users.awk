# users.awk: the accounts of a cloud-config user-data (the "users" list),
# read the simple way: one "user NAME [UID]" line per list item with a name
# (UID when the item has a numeric uid:, as gpuvm's templates write for a
# VM with a home), then one "key NAME KEY" line per entry of its
# ssh_authorized_keys list. Quoted ("…" or '…') and plain scalars are
# understood; flow lists ([a, b]), anchors and multi-line scalars are not,
# and are skipped. A top-level ssh_authorized_keys list goes to the first
# user, after every user's own; an item without a name (such as
# "- default") makes no account and its keys go nowhere.
function indent(s) { match(s, /^ */); return RLENGTH }
function unquote(v) {
	sub(/^[ \t]+/, "", v)
	sub(/[ \t\r]+$/, "", v)
	if (v ~ /^".*"$/) {
		v = substr(v, 2, length(v) - 2)
		gsub(/\\"/, "\"", v)
		gsub(/\\\\/, "\\", v)
	} else if (v ~ /^'.*'$/) {
		v = substr(v, 2, length(v) - 2)
		gsub(/''/, "'", v)
	} else {
		sub(/[ \t]+#.*$/, "", v) # a comment after a plain scalar
	}
	return v
}
function addkey(k) {
	k = unquote(k)
	if (k == "" || item == 0) return
	nkeys[item]++
	keys[item, nkeys[item]] = k
}
{ sub(/\r$/, "") }
/^[ \t]*(#|$)/ { next }
# A top-level key ends the list before it.
/^[^ -]/ {
	inusers = 0; inkeys = 0; topkeys = 0
	if ($0 ~ /^users:[ \t]*$/) inusers = 1
	if ($0 ~ /^ssh_authorized_keys:[ \t]*$/) { topkeys = 1; keyind = 0 }
	next
}
topkeys {
	if ($0 ~ /^ *- /) { v = $0; sub(/^ *- /, "", v); k = unquote(v); if (k != "") toplevel[++ntop] = k }
	next
}
!inusers { next }
{
	ind = indent($0)
	line = substr($0, ind + 1)
	if (inkeys && ind >= keyind && line ~ /^- /) { addkey(substr(line, 3)); next }
	if (inkeys && ind <= keyind) inkeys = 0
	if (line ~ /^- /) { # a new list item: a new user (the uid may come before the name)
		item++
		line = substr(line, 3)
		sub(/^ +/, "", line)
		ind = ind + 2
	}
	if (item == 0) next
	if (line ~ /^name:/) {
		names[item] = unquote(substr(line, 6))
	} else if (line ~ /^uid:/) {
		uids[item] = unquote(substr(line, 5))
	} else if (line ~ /^ssh_authorized_keys:[ \t]*$/) {
		inkeys = 1; keyind = ind
	}
}
END {
	first = 0
	for (i = 1; i <= item; i++) {
		if (names[i] == "") continue
		if (!first) first = i
		u = ""
		if (uids[i] ~ /^[0-9]+$/) u = " " uids[i]
		print "user " names[i] u
		for (j = 1; j <= nkeys[i]; j++) print "key " names[i] " " keys[i, j]
	}
	if (first)
		for (i = 1; i <= ntop; i++) print "key " names[first] " " toplevel[i]
}
