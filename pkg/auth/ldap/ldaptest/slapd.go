// Package ldaptest starts a real OpenLDAP slapd for tests: its own process,
// in a private directory, on a free port of 127.0.0.1, with a generated
// slapd.conf, a TLS certificate signed by a CA made for the test, and an
// LDIF of users and groups. It is stopped when the test ends. Without
// slapd (Debian's slapd package: scripts/setup-host.sh installs it) the
// test is skipped, saying so.
package ldaptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goldap "github.com/go-ldap/ldap/v3"
)

// The directory's names.
const (
	Suffix       = "dc=example,dc=org"
	RootDN       = "cn=admin," + Suffix
	RootPassword = "root-secret"
	People       = "ou=people," + Suffix
	Groups       = "ou=groups," + Suffix
	// ServiceDN is the account gpuvm searches with; its password is
	// ServicePassword.
	ServiceDN       = "cn=gpuvm,ou=services," + Suffix
	ServicePassword = "service-secret"
)

// User is a person of the directory, in People, with a password.
type User struct {
	UID, Password string
	Groups        []string // cn of groupOfNames entries in Groups
}

// DefaultUsers are the people of the test directory: alice (ml101),
// bob (ml101, gpu-admins), carol (no group), and "admin" (a directory
// user named as gpuvm's local admin).
var DefaultUsers = []User{
	{UID: "alice", Password: "alice-pw", Groups: []string{"ml101"}},
	{UID: "bob", Password: "bob-pw", Groups: []string{"ml101", "gpu-admins"}},
	{UID: "carol", Password: "carol-pw"},
	{UID: "admin", Password: "admin-pw"},
}

// Server is a running slapd.
type Server struct {
	// URL is ldap://127.0.0.1:PORT (StartTLS is offered); LDAPSURL
	// ldaps://127.0.0.1:PORT2.
	URL, LDAPSURL string
	// CAFile signs the server's certificate (for 127.0.0.1 and
	// localhost); CAPEM is its content.
	CAFile string
	CAPEM  []byte
	// ServicePasswordFile holds ServicePassword.
	ServicePasswordFile string
	Dir                 string
}

// Start runs slapd with users (DefaultUsers when nil).
func Start(t testing.TB, users []User) *Server {
	t.Helper()
	slapd, err := exec.LookPath("slapd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/slapd", "/usr/local/sbin/slapd"} {
			if _, err := os.Stat(p); err == nil {
				slapd = p
			}
		}
	}
	slapadd := filepath.Join(filepath.Dir(slapd), "slapadd")
	if slapd == "" {
		t.Skip("slapd is not installed (apt-get install slapd ldap-utils, as scripts/setup-host.sh does): LDAP tests skipped")
	}
	if _, err := os.Stat(slapadd); err != nil {
		t.Skipf("slapadd is not beside %s: LDAP tests skipped", slapd)
	}
	modules := ""
	for _, dir := range []string{"/usr/lib/ldap", "/usr/lib/x86_64-linux-gnu/ldap", "/usr/lib/aarch64-linux-gnu/ldap", "/usr/lib/openldap"} {
		if _, err := os.Stat(filepath.Join(dir, "back_mdb.so")); err == nil {
			modules = "modulepath " + dir + "\nmoduleload back_mdb\n"
			break
		}
	}
	schemaDir := "/etc/ldap/schema"
	if _, err := os.Stat(filepath.Join(schemaDir, "inetorgperson.schema")); err != nil {
		t.Skipf("the OpenLDAP schemas are not in %s: LDAP tests skipped", schemaDir)
	}
	if users == nil {
		users = DefaultUsers
	}

	dir := t.TempDir()
	s := &Server{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), ServicePasswordFile: filepath.Join(dir, "service.password")}
	ca, caKey := NewCA(t, "gpuvm test directory CA")
	s.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	certPEM, keyPEM := NewServerCert(t, ca, caKey)
	write(t, s.CAFile, s.CAPEM)
	write(t, filepath.Join(dir, "server.pem"), certPEM)
	write(t, filepath.Join(dir, "server.key"), keyPEM)
	write(t, s.ServicePasswordFile, []byte(ServicePassword+"\n"))
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	for _, sc := range []string{"core", "cosine", "inetorgperson", "nis"} {
		fmt.Fprintf(&conf, "include %s/%s.schema\n", schemaDir, sc)
	}
	fmt.Fprintf(&conf, `pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
%[2]s
TLSCACertificateFile %[1]s/ca.pem
TLSCertificateFile %[1]s/server.pem
TLSCertificateKeyFile %[1]s/server.key
database mdb
maxsize 16777216
suffix "%[3]s"
rootdn "%[4]s"
rootpw %[5]s
directory %[1]s/db
access to attrs=userPassword by anonymous auth by self read by * none
access to * by dn.exact="%[6]s" read by self read by users read by * none
`, dir, modules, Suffix, RootDN, RootPassword, ServiceDN)
	confPath := filepath.Join(dir, "slapd.conf")
	write(t, confPath, []byte(conf.String()))
	ldifPath := filepath.Join(dir, "data.ldif")
	write(t, ldifPath, []byte(LDIF(users)))
	if out, err := exec.Command(slapadd, "-f", confPath, "-l", ldifPath).CombinedOutput(); err != nil {
		t.Fatalf("slapadd: %v\n%s", err, out)
	}

	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, port2 := freePort(t), freePort(t)
		s.URL = "ldap://127.0.0.1:" + strconv.Itoa(port)
		s.LDAPSURL = "ldaps://127.0.0.1:" + strconv.Itoa(port2)
		var log bytes.Buffer
		// -d keeps slapd in the foreground, as a child the test stops.
		cmd := exec.Command(slapd, "-f", confPath, "-h", s.URL+"/ "+s.LDAPSURL+"/", "-d", "0")
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start slapd: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = waitReady(port, exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			return s
		}
		_ = cmd.Process.Kill()
		<-exited
		lastErr = fmt.Errorf("%w\n%s", lastErr, log.String())
	}
	t.Fatalf("slapd did not start: %v", lastErr)
	return nil
}

func waitReady(port int, exited <-chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("slapd exited: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("slapd not listening on port %d after 15s", port)
}

// LDIF is the directory's content: the organisation, its units, the
// service account, users and their groups (groupOfNames).
func LDIF(users []User) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n", Suffix)
	for _, ou := range []string{"people", "groups", "services"} {
		fmt.Fprintf(&b, "dn: ou=%s,%s\nobjectClass: organizationalUnit\nou: %s\n\n", ou, Suffix, ou)
	}
	fmt.Fprintf(&b, "dn: %s\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: gpuvm\nuserPassword: %s\n\n", ServiceDN, ServicePassword)
	members := map[string][]string{}
	var order []string
	for _, u := range users {
		fmt.Fprintf(&b, "dn: uid=%s,%s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\nuserPassword: %s\n\n", u.UID, People, u.UID, u.UID, u.UID, u.Password)
		for _, g := range u.Groups {
			if _, ok := members[g]; !ok {
				order = append(order, g)
			}
			members[g] = append(members[g], "uid="+u.UID+","+People)
		}
	}
	for _, g := range order {
		fmt.Fprintf(&b, "dn: cn=%s,%s\nobjectClass: groupOfNames\ncn: %s\n", g, Groups, g)
		for _, m := range members[g] {
			fmt.Fprintf(&b, "member: %s\n", m)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Root connects as the directory's root, to change it during a test.
func (s *Server) Root(t testing.TB) *goldap.Conn {
	t.Helper()
	c, err := goldap.DialURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Bind(RootDN, RootPassword); err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DeleteUser removes a user from the directory (not from its groups'
// member lists: a directory that keeps dangling members must not matter).
func (s *Server) DeleteUser(t testing.TB, uid string) {
	t.Helper()
	if err := s.Root(t).Del(goldap.NewDelRequest("uid="+uid+","+People, nil)); err != nil {
		t.Fatalf("delete %s: %v", uid, err)
	}
}

// NewCA makes a self-signed CA.
func NewCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

// NewServerCert makes a certificate for 127.0.0.1 and localhost signed by
// ca, as PEM, with its key (PKCS #8).
func NewServerCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TLSWorks says whether a TLS handshake with the server and caPEM works
// (a check of the helper itself).
func TLSWorks(addr string, caPEM []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	return c.Close()
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
