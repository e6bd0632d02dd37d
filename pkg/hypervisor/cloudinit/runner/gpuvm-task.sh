# --- the runner: the same for every task (pkg/hypervisor/cloudinit/runner) ---
# POSIX sh, and busybox's: it runs in gpuvm's tiny test guest too.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
log() { echo "gpuvm-task: $*" >&2; }
if [ "$1" != run ]; then
	# Started by cloud-init (or the tiny guest's /init): the task runs
	# detached, as a systemd unit where there is systemd, so that the boot
	# goes on.
	cp "$0" "$D/run.sh"
	if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemd-run --unit=gpuvm-task --description="gpuvm task $GPUVM_TASK_ID" /bin/sh "$D/run.sh" run && exit 0
	fi
	setsid /bin/sh "$D/run.sh" run </dev/null >/dev/console 2>&1 &
	exit 0
fi

# The port: /dev/virtio-ports/NAME where udev makes it, else found by its
# name in sysfs (busybox's devtmpfs has only /dev/vportNpM).
port=${GPUVM_TASK_PORT:-/dev/virtio-ports/org.gpuvm.task.0}
i=0
while [ ! -e "$port" ]; do
	for n in /sys/class/virtio-ports/*/name; do
		[ -r "$n" ] && [ "$(cat "$n")" = org.gpuvm.task.0 ] && p=${n%/name} && port=/dev/${p##*/}
	done
	[ -e "$port" ] && break
	i=$((i + 1))
	if [ $i -ge 600 ]; then
		log "no virtio port org.gpuvm.task.0 after 60 s: is this a gpuvm task VM?"
		exit 1
	fi
	sleep 0.1
done
# One open of the port for both ways: a virtio port is opened once at a time.
exec 3<>"$port"
send() { printf '%s\n' "$1" >&3; }
send '{"t":"hello","task":"'"$GPUVM_TASK_ID"'"}'

# The owner's home, when the VM has one: waited for, the working directory
# and where the log is kept.
wd=/
logfile=${GPUVM_TASK_LOGDIR:-/var/log}/gpuvm-task-$GPUVM_TASK_ID.log
mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
if [ -n "$GPUVM_TASK_HOME" ]; then
	i=0
	until mounted "$GPUVM_TASK_HOME"; do
		i=$((i + 1))
		if [ $i -ge 120 ]; then
			log "the home $GPUVM_TASK_HOME is not mounted after 120 s: running in /"
			break
		fi
		sleep 1
	done
	if mounted "$GPUVM_TASK_HOME"; then
		wd=$GPUVM_TASK_HOME
		logfile=$wd/.gpuvm/tasks/$GPUVM_TASK_ID.log
	fi
fi
u=$GPUVM_TASK_USER
if ! id -u "$u" >/dev/null 2>&1; then
	log "no account $u: running as root"
	u=root
fi
mkdir -p "$(dirname "$logfile")"
: >"$logfile"
[ "$u" = root ] || chown "$u" "$(dirname "$logfile")" "$logfile" 2>/dev/null
chmod 0755 "$D"
chmod 0644 "$D/cmd"
[ -f "$D/script" ] && chmod 0755 "$D/script"

# Requests of gpuvmd: {"t":"signal","sig":"TERM"} signals the command's
# process group: TERM and KILL at the time limit or a cancel, the task's
# warning signal (USR1 ...) its lead before the limit; a name not in the
# list is ignored. A read sees the end of the port while gpuvmd is not
# connected: it is read again.
(
	while :; do
		while read -r line; do
			case $line in
			*'"t":"signal"'*)
				sig=$(echo "$line" | sed -n 's/.*"sig":"\([A-Z0-9]*\)".*/\1/p')
				case " TERM KILL HUP INT QUIT ABRT USR1 USR2 ALRM CONT WINCH XCPU URG " in
				*" $sig "*) ;;
				*) sig= ;;
				esac
				pid=$(cat "$D/pid" 2>/dev/null)
				if [ -n "$sig" ] && [ -n "$pid" ]; then
					kill -"$sig" -"$pid" 2>/dev/null || kill -"$sig" "$pid" 2>/dev/null
				fi
				;;
			esac
		done <&3
		sleep 1
	done
) &
reader=$!
(while sleep 10; do send '{"t":"hb"}'; done) &
hb=$!

# The command, in a session of its own (its process group is what a signal
# reaches), as the owner, without the port; "start" is written before any
# of its output. Its output, stdout and stderr as one, goes to gpuvmd as
# "out" lines with their byte offsets, and to the log.
(
	setsid sh -c 'echo $$ >"$1/pid"; printf "{\"t\":\"start\",\"pid\":%d}\n" $$ >&3; exec 3>&-
		cd "$2" || cd /
		if [ "$3" = root ]; then exec sh "$1/cmd"; fi
		exec su -s /bin/sh "$3" -c "sh $1/cmd"' gpuvm-task "$D" "$wd" "$u" </dev/null 2>&1
	echo $? >"$D/rc"
) | LC_ALL=C awk -v logfile="$logfile" '
BEGIN {
	for (i = 1; i < 32; i++) ctl[sprintf("%c", i)] = sprintf("\\u%04x", i)
	ctl["\t"] = "\\t"; ctl["\r"] = "\\r"; ctl["\\"] = "\\\\"; ctl["\""] = "\\\""
	ctl[sprintf("%c", 127)] = "\\u007f"
	off = 0
}
function esc(s,    out, i, c, n) {
	if (!index(s, "\\") && !index(s, "\"") && s !~ /[[:cntrl:]]/) return s
	out = ""; n = length(s)
	for (i = 1; i <= n; i++) {
		c = substr(s, i, 1)
		out = out ((c in ctl) ? ctl[c] : c)
	}
	return out
}
{
	printf "{\"t\":\"out\",\"off\":%.0f,\"d\":\"%s\\n\"}\n", off, esc($0)
	fflush()
	print $0 >>logfile
	fflush(logfile)
	off += length($0) + 1
}' >&3
rc=$(cat "$D/rc" 2>/dev/null)
rc=${rc:-255}
code=$rc
sig=0
if [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then
	code=0
	sig=$((rc - 128))
fi
send '{"t":"exit","code":'"$code"',"signal":'"$sig"'}'
kill "$reader" "$hb" 2>/dev/null
sleep 1
sync
${GPUVM_TASK_POWEROFF:-poweroff}
