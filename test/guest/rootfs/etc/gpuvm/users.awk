# users.awk: the accounts of a cloud-config user-data (the "users" list),
# read the simple way: one "user NAME" line per list item with a name, then
# one "key NAME KEY" line per entry of its ssh_authorized_keys list. Quoted
# ("…" or '…') and plain scalars are understood; flow lists ([a, b]),
# anchors and multi-line scalars are not, and are skipped. A top-level
# ssh_authorized_keys list goes to the first user; an item without a name
# (such as "- default") makes no account and its keys go nowhere.
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
	if (k == "") return
	if (name != "") print "key " name " " k # a nameless item's keys go nowhere
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
	if (line ~ /^- /) { # a new list item: a new user
		name = ""
		item = ind
		line = substr(line, 3)
		sub(/^ +/, "", line)
		ind = ind + 2
	}
	if (line ~ /^name:/) {
		name = unquote(substr(line, 6))
		if (name != "") { print "user " name; users[++nusers] = name }
	} else if (line ~ /^ssh_authorized_keys:[ \t]*$/) {
		inkeys = 1; keyind = ind
	}
}
END {
	if (nusers > 0)
		for (i = 1; i <= ntop; i++) print "key " users[1] " " toplevel[i]
}
