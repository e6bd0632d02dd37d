# hostkey.awk: the ed25519 SSH host key of a seed's vendor-data, as gpuvm
# writes it (a #cloud-config, or that part of a MIME multipart message):
# the lines of the block scalar under "ssh_keys:" / "  ed25519_private: |",
# without their indentation (an OpenSSH private key). Nothing when there is
# none. CRLF line ends are understood.
{ sub(/\r$/, "") }
inkey {
	if ($0 ~ /^    [^ ]/) { print substr($0, 5); next }
	inkey = 0
}
/^ssh_keys:[ \t]*$/ { insk = 1; next }
insk && /^  ed25519_private:[ \t]*\|[-+]?[ \t]*$/ { inkey = 1; next }
/^[^ ]/ { insk = 0 }
