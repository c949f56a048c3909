package filter

// Program is a compiled classic-BPF seccomp program for one architecture.
type Program struct {
	Arch   string // "amd64" or "arm64"
	Raw    []byte // struct sock_filter array, native endian, 8 bytes per instruction, ready for seccomp(SECCOMP_SET_MODE_FILTER)
	SHA256 string // hex digest of Raw
}

// instructionSize is sizeof(struct sock_filter): u16 code, u8 jt, u8 jf,
// u32 k.
const instructionSize = 8

// maxInstructions is BPF_MAXINSNS, the kernel's limit on a classic-BPF
// program's length.
const maxInstructions = 4096
