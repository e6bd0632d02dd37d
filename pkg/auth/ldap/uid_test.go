package ldap

import (
	"testing"

	goldap "github.com/go-ldap/ldap/v3"
)

func TestUIDNumber(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want int64
	}{
		{nil, 0},
		{[]string{"10042"}, 10042},
		{[]string{" 2001 "}, 2001},
		{[]string{"999"}, 0},        // a system account's
		{[]string{"65534"}, 0},      // nobody's
		{[]string{"4294967295"}, 0}, // (uid_t)-1
		{[]string{"4294967294"}, 0},
		{[]string{"abc"}, 0},
		{[]string{"-5"}, 0},
	} {
		e := goldap.NewEntry("uid=ann,ou=people,dc=example,dc=org", map[string][]string{"uidNumber": tc.vals})
		if got := uidNumber(e); got != tc.want {
			t.Errorf("uidNumber(%q) = %d, want %d", tc.vals, got, tc.want)
		}
	}
}
