package domain

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
)

// The element gpuvm writes in a domain's <metadata>:
//
//	<gpuvm:vm xmlns:gpuvm="https://gpuvm.dev/xmlns/domain/1">
//	  <gpuvm:installation>0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f</gpuvm:installation>
//	  <gpuvm:id>vm-42</gpuvm:id>
//	  <gpuvm:owner>alice</gpuvm:owner>
//	  <gpuvm:profile>render-l40s</gpuvm:profile>
//	  <gpuvm:volume pool="gpuvm">vm-42.qcow2</gpuvm:volume>
//	</gpuvm:vm>
const metadataElement = "vm"

// marshal writes m as gpuvm's metadata element. encoding/xml escapes the
// values; the prefixed names are written as given.
func (m Metadata) marshal() (string, error) {
	var b bytes.Buffer
	e := xml.NewEncoder(&b)
	p := NamespacePrefix + ":"
	start := xml.StartElement{
		Name: xml.Name{Local: p + metadataElement},
		Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns:" + NamespacePrefix}, Value: Namespace}},
	}
	if err := e.EncodeToken(start); err != nil {
		return "", err
	}
	for _, f := range []struct{ name, value string }{{"installation", m.Installation}, {"id", m.VMID}, {"owner", m.Owner}, {"profile", m.Profile}} {
		if f.value == "" {
			continue
		}
		if err := e.EncodeElement(f.value, xml.StartElement{Name: xml.Name{Local: p + f.name}}); err != nil {
			return "", err
		}
	}
	for _, v := range m.Volumes {
		el := xml.StartElement{Name: xml.Name{Local: p + "volume"}, Attr: []xml.Attr{{Name: xml.Name{Local: "pool"}, Value: v.Pool}}}
		if err := e.EncodeElement(v.Name, el); err != nil {
			return "", err
		}
	}
	if err := e.EncodeToken(start.End()); err != nil {
		return "", err
	}
	if err := e.Flush(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// MetadataXML is the metadata element of m, as Build writes it in <metadata>.
func MetadataXML(m Metadata) (string, error) { return m.marshal() }

// metadataDoc reads gpuvm's element. Child names match in any namespace:
// libvirt's virDomainGetMetadata returns the element stripped of its
// namespace ("<vm><id>…"), while a whole domain document keeps it.
type metadataDoc struct {
	XMLName      xml.Name
	Installation string `xml:"installation"`
	ID           string `xml:"id"`
	Owner        string `xml:"owner"`
	Profile      string `xml:"profile"`
	Volumes      []struct {
		Pool string `xml:"pool,attr"`
		Name string `xml:",chardata"`
	} `xml:"volume"`
}

func (d *metadataDoc) metadata() Metadata {
	m := Metadata{Installation: d.Installation, VMID: d.ID, Owner: d.Owner, Profile: d.Profile}
	for _, v := range d.Volumes {
		m.Volumes = append(m.Volumes, VolumeRef{Pool: v.Pool, Name: v.Name})
	}
	return m
}

// ErrNotGpuvm says a domain carries no gpuvm metadata: it is not gpuvm's.
var ErrNotGpuvm = errors.New("not a gpuvm domain: no gpuvm metadata")

// ParseMetadata reads gpuvm's metadata element as libvirt's
// virDomainGetMetadata returns it for Namespace (without namespace), or with
// gpuvm's namespace under any prefix.
func ParseMetadata(s string) (Metadata, error) {
	if strings.TrimSpace(s) == "" {
		return Metadata{}, ErrNotGpuvm
	}
	var d metadataDoc
	if err := xml.Unmarshal([]byte(s), &d); err != nil {
		return Metadata{}, fmt.Errorf("gpuvm metadata: %w", err)
	}
	if d.XMLName.Local != metadataElement || (d.XMLName.Space != "" && d.XMLName.Space != Namespace) {
		return Metadata{}, ErrNotGpuvm
	}
	return d.metadata(), nil
}

// MetadataFromDomainXML finds gpuvm's element in a whole domain XML document.
func MetadataFromDomainXML(domainXML string) (Metadata, error) {
	var d struct {
		Metadata *struct {
			Elements []metadataDoc `xml:",any"`
		} `xml:"metadata"`
	}
	if err := xml.Unmarshal([]byte(domainXML), &d); err != nil {
		return Metadata{}, fmt.Errorf("domain XML: %w", err)
	}
	if d.Metadata != nil {
		for _, e := range d.Metadata.Elements {
			if e.XMLName.Space == Namespace && e.XMLName.Local == metadataElement {
				return e.metadata(), nil
			}
		}
	}
	return Metadata{}, ErrNotGpuvm
}
