package cloudinit

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"

	"github.com/GehirnInc/crypt/sha512_crypt"
)

// The one-time desktop password of a VM: gpuvmd makes it at create, the
// seed carries only its SHA-512 crypt hash (users[].passwd, which cloud-init
// hands to useradd/chpasswd -e as is), and the owner reads the password once
// through the API. Compared with cloud-init's chpasswd module and a clear
// text password, the hash keeps the password out of the seed ISO, out of
// /var/lib/cloud in the guest and out of anything that copies the seed.
//
// The hash is made with github.com/GehirnInc/crypt (BSD-2-Clause, pure Go,
// checked against glibc's test vectors and, in this package's tests, against
// openssl passwd -6); glibc's crypt(3) in the guest verifies it.

// passwordAlphabet has no characters that are easy to misread or mistype
// over a remote keyboard map (0/O, 1/l/I, and no symbols).
const passwordAlphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// PasswordLength is the length of a desktop password: 20 characters of 57,
// about 116 bits.
const PasswordLength = 20

// saltAlphabet is crypt(3)'s.
const saltAlphabet = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewPassword makes a random desktop password.
func NewPassword() (string, error) { return randomString(passwordAlphabet, PasswordLength) }

// HashPassword is the SHA-512 crypt ("$6$<salt>$<hash>", 5000 rounds, a
// random 16-character salt) of password.
func HashPassword(password string) (string, error) {
	salt, err := randomString(saltAlphabet, 16)
	if err != nil {
		return "", err
	}
	return HashPasswordWithSalt(password, salt)
}

// HashPasswordWithSalt is HashPassword with a given salt (tests).
func HashPasswordWithSalt(password, salt string) (string, error) {
	h, err := sha512_crypt.New().Generate([]byte(password), []byte("$6$"+salt))
	if err != nil {
		return "", fmt.Errorf("hash the desktop password: %w", err)
	}
	return h, nil
}

func randomString(alphabet string, n int) (string, error) {
	max := big.NewInt(int64(len(alphabet)))
	var b strings.Builder
	for range n {
		i, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("random password: %w", err)
		}
		b.WriteByte(alphabet[i.Int64()])
	}
	return b.String(), nil
}

// LoginName is the guest account of a gpuvm user: the user name lower-cased,
// with every character a login name may not have replaced by '_', cut to 32
// characters and prefixed with "u" when it does not start with a letter or
// '_'. A name that ends up reserved (root, …) or empty becomes "gpuvm".
func LoginName(user string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name != "" && !(name[0] >= 'a' && name[0] <= 'z' || name[0] == '_') {
		name = "u" + name
	}
	if len(name) > 32 {
		name = name[:32]
	}
	if name == "" || reservedUsers[name] || !userRE.MatchString(name) {
		return "gpuvm"
	}
	return name
}
