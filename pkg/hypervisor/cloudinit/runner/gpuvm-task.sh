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
# A write blocks while gpuvmd is not connected. The protocol's version is 2
# (docs/tasks.md): the output is kept in the log file and sent again from
# the offset each "from" names; heartbeats from the hello on, while this
# shell lives.
exec 3<>"$port"
send() { printf '%s\n' "$1" >&3; }
send '{"t":"hello","v":2,"task":"'"$GPUVM_TASK_ID"'"}'
main=$$
(while sleep 10; do kill -0 "$main" 2>/dev/null || exit 0; send '{"t":"hb","v":2}'; done) &
hb=$!

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

# The sender: the log from byte $1 on, as "out" lines of at most 32 KiB
# (cut at a UTF-8 character's start), numbered with their byte offsets;
# $D/sent says how far it got. One at a time, in a session of its own, so
# that a new one stops the last with its tail.
sender_awk='
BEGIN {
	for (i = 1; i < 32; i++) ctl[sprintf("%c", i)] = sprintf("\\u%04x", i)
	ctl["\t"] = "\\t"; ctl["\r"] = "\\r"; ctl["\\"] = "\\\\"; ctl["\""] = "\\\""
	ctl[sprintf("%c", 127)] = "\\u007f"
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
	s = $0 "\n"
	while (s != "") {
		n = length(s)
		if (n > 32768) {
			n = 32768
			while (n > 32000 && (c = substr(s, n + 1, 1)) >= "\200" && c <= "\277") n--
		}
		printf "{\"t\":\"out\",\"off\":%.0f,\"d\":\"%s\"}\n", off, esc(substr(s, 1, n))
		fflush()
		off += n
		s = substr(s, n + 1)
	}
	printf "%.0f\n", off >sent
	close(sent)
}'
# mawk (Debian's and Ubuntu's awk) reads a pipe in blocks: -W interactive
# makes it take each line as it comes.
awk_i=
case $(awk -W version 2>&1 </dev/null) in *mawk*) awk_i="-W interactive" ;; esac
stop_sender() {
	pid=$(cat "$D/sender" 2>/dev/null)
	[ -n "$pid" ] && kill -TERM -"$pid" 2>/dev/null
	rm -f "$D/sender"
}
start_sender() {
	echo "$1" >"$D/sent"
	setsid sh -c 'tail -c +"$(($2 + 1))" -f "$3" 2>/dev/null | LC_ALL=C awk $5 -v off="$2" -v sent="$1/sent" "$4" >&3' \
		gpuvm-task-sender "$D" "$1" "$logfile" "$sender_awk" "$awk_i" </dev/null &
	echo $! >"$D/sender"
}

# Requests of gpuvmd: {"t":"from","off":N} (gpuvmd connected and keeps
# the output up to N): "resume", then the output from N on, again if it was
# sent; the exit is sent again after it. {"t":"bye"}: the exit is kept.
# {"t":"signal","sig":"TERM"} signals the command's process group: TERM
# and KILL at the time limit or a cancel, the task's warning signal (USR1
# ...) its lead before the limit; a name not in the list is ignored. A read
# sees the end of the port while gpuvmd is not connected: it is read again.
rm -f "$D/bye" "$D/exit-sent" "$D/sender" "$D/size"
(
	start_sender 0
	while :; do
		while read -r line; do
			case $line in
			*'"t":"from"'*)
				off=$(echo "$line" | sed -n 's/.*"off":\([0-9][0-9]*\).*/\1/p')
				off=${off:-0}
				size=$(cat "$D/size" 2>/dev/null)
				if [ -n "$size" ] && [ "$off" -gt "$size" ]; then off=$size; fi
				stop_sender
				rm -f "$D/exit-sent"
				send '{"t":"resume","v":2,"off":'"$off"'}'
				start_sender "$off"
				;;
			*'"t":"bye"'*) : >"$D/bye" ;;
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

# The command, in a session of its own (its process group is what a signal
# reaches), as the owner, without the port; "start" is written before any
# of its output. Its output, stdout and stderr as one, goes to the log,
# which the sender sends to gpuvmd. (In a subshell: setsid forks when its
# caller leads its process group.)
(setsid sh -c 'echo $$ >"$1/pid"; printf "{\"t\":\"start\",\"pid\":%d}\n" $$ >&3; exec 3>&-
	cd "$2" || cd /
	if [ "$3" = root ]; then exec sh "$1/cmd"; fi
	exec su -s /bin/sh "$3" -c "sh $1/cmd"' gpuvm-task "$D" "$wd" "$u" </dev/null >>"$logfile" 2>&1)
rc=$?
code=$rc
sig=0
if [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then
	code=0
	sig=$((rc - 128))
fi
# A last line without its newline gets one (the sender sends lines).
if [ -s "$logfile" ] && [ "$(tail -c 1 "$logfile" | wc -l)" -eq 0 ]; then echo >>"$logfile"; fi
size=$(($(wc -c <"$logfile")))
echo "$size" >"$D/size"
# The exit, with the output's size, once the sender has sent it all, and
# again after each "from", until gpuvmd says bye (or after
# GPUVM_TASK_LINGER seconds, 600 by default, without gpuvmd).
i=0
linger=$((${GPUVM_TASK_LINGER:-600} * 10))
until [ -e "$D/bye" ] || [ $i -ge $linger ]; do
	sent=$(cat "$D/sent" 2>/dev/null)
	if [ ! -e "$D/exit-sent" ] && [ "${sent:-0}" -ge "$size" ]; then
		: >"$D/exit-sent"
		send '{"t":"exit","code":'"$code"',"signal":'"$sig"',"off":'"$size"'}'
	fi
	i=$((i + 1))
	sleep 0.1
done
kill "$reader" "$hb" 2>/dev/null
stop_sender
sync
${GPUVM_TASK_POWEROFF:-poweroff}
