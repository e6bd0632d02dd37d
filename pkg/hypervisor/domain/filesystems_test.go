package domain

import "testing"

func TestHasVirtiofs(t *testing.T) {
	for _, tc := range []struct {
		xml  string
		want bool
	}{
		{`<domain type="kvm"><name>a</name></domain>`, false},
		{`<domain type="kvm"><name>a</name><devices><disk type="file" device="disk"><target dev="vda"/></disk></devices></domain>`, false},
		{`<domain type="kvm"><name>a</name><devices><filesystem type="mount" accessmode="passthrough"><driver type="virtiofs"/>` +
			`<source dir="/home/ann"/><target dir="home"/></filesystem></devices></domain>`, true},
		{`<domain type="kvm"><name>a</name><devices><filesystem type="mount" accessmode="mapped"><driver type="path"/>` +
			`<source dir="/srv"/><target dir="srv"/></filesystem></devices></domain>`, false},
	} {
		got, err := HasVirtiofs(tc.xml)
		if err != nil || got != tc.want {
			t.Errorf("HasVirtiofs(%s) = %v, %v; want %v", tc.xml, got, err, tc.want)
		}
	}
	if _, err := HasVirtiofs("<domain"); err == nil {
		t.Error("broken XML parsed")
	}
}
