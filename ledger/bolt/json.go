package bolt

import (
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// jsonV1 is encoding/json's behaviour — its output byte for byte, and its
// tolerance when reading — on go-json-experiment's engine, which decodes
// and encodes a row in about 60% of encoding/json's time. Rows, events,
// inbox records and orphans are encoded inside the single committer, so
// that time is serial. TestEncodingMatchesEncodingJSON keeps the file
// format identical to what encoding/json writes and reads.
var jsonV1 = jsonv1.DefaultOptionsV1()

func marshal(v any) ([]byte, error) { return jsonv2.Marshal(v, jsonV1) }

func unmarshal(data []byte, v any) error { return jsonv2.Unmarshal(data, v, jsonV1) }
