# vendorpart.awk: one part of a seed's vendor-data as gpuvm writes it
# (pkg/hypervisor/cloudinit): in a MIME multipart message, the body of the
# part whose Content-Disposition names the file "want" (-v want=NAME), as
# it is; in a vendor-data of one part, the whole of it when its second line
# starts with "single" (-v single=TEXT, the comment gpuvm's script of that
# name starts with). Nothing when there is no such part. CRLF line ends are
# understood; the output has LF ones.
{ sub(/\r$/, "") }
NR == 1 && tolower($0) ~ /^content-type:[ \t]*multipart\// {
	multi = 1
	if (match($0, /boundary="[^"]*"/)) b = substr($0, RSTART + 10, RLENGTH - 11)
	else if (match($0, /boundary=[^ ;]+/)) b = substr($0, RSTART + 9, RLENGTH - 9)
	next
}
!multi { whole[NR] = $0; next }
b != "" && ($0 == "--" b || $0 == "--" b "--") {
	# The line break before a boundary is the boundary's: a held empty
	# line is not the body's.
	if (inbody && held && prev != "") print prev
	inhdr = 1; inbody = 0; hit = 0; held = 0
	next
}
inhdr {
	if ($0 == "") { inhdr = 0; inbody = hit; next }
	if (tolower($0) ~ /^content-disposition:/ && index($0, "filename=\"" want "\"")) hit = 1
	next
}
inbody {
	if (held) print prev
	prev = $0; held = 1
}
END {
	if (multi || single == "" || index(whole[2], single) != 1) exit
	for (i = 1; i <= NR; i++) print whole[i]
}
