package record

import (
	"testing"

	ita "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cordon-project/cordon/internal/attest"
)

// TestStatementIsInTotoV1: the reference in-toto implementation parses a
// signed record's statement (from the verified payload) and validates it
// as a Statement v1 with the record's subjects and predicate type.
func TestStatementIsInTotoV1(t *testing.T) {
	k, pub := testKey(t)
	env, err := Sign(Sample(), k)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.VerifyKeyID(env, pub, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, err := attest.Payload(env)
	if err != nil {
		t.Fatal(err)
	}
	var s ita.Statement
	if err := protojson.Unmarshal(body, &s); err != nil {
		t.Fatalf("in-toto cannot parse the statement: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("in-toto refuses the statement: %v", err)
	}
	if s.GetPredicateType() != PredicateType || len(s.GetSubject()) != len(st.Subject) ||
		s.GetSubject()[0].GetDigest()["sha256"] != st.Subject[0].Digest["sha256"] {
		t.Errorf("in-toto reads %v", &s)
	}
	if s.GetPredicate().GetFields()["schema"].GetStringValue() != Schema {
		t.Errorf("predicate schema = %v", s.GetPredicate().GetFields()["schema"])
	}
	// Control: in-toto refuses a statement of another type.
	s.Type = "https://in-toto.io/Statement/v2"
	if err := s.Validate(); err == nil {
		t.Fatal("in-toto validated a wrong _type: the check above proves nothing")
	}
}
