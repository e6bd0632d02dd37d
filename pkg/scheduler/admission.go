package scheduler

// Admission is the sharing policy's answer to a VM asked for, before it is
// queued: nothing in the way (Reason.OK), a Reason that keeps it waiting
// for now, or, with Refuse, one that means it can never start. The server
// turns it into text, or a problem, at the edge (Reason.Text).
type Admission struct {
	Reason Reason
	Refuse bool
}

// Text is a reason as people read it: its detail (a quota's prefixed
// "quota: "), or its code when it has none; "" for no reason.
func (r Reason) Text() string {
	switch {
	case r.Detail == "":
		return string(r.Code)
	case r.Code == CodeQuota:
		return "quota: " + r.Detail
	}
	return r.Detail
}
