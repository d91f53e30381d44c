package yamlnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// ParseOne reads exactly one document into doc (a file with none leaves
// doc empty); what names the file's contents in the error for a second
// document. yaml.v3 is third-party code fed operator input: a panic in it
// becomes an error.
func ParseOne(data []byte, doc *yaml.Node, what string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return err
		}
		return fmt.Errorf("line %d: a second YAML document: %s", extra.Line, what)
	}
	return nil
}

// Mapping calls each for every entry of the mapping node n, in order, and
// bad instead for an entry it refuses: a key that is not a plain string, a
// merge key (<<), or a key seen before (duplicate true; msg names the first
// line). The caller checks n.Kind first: Mapping reads n.Content as
// key-value pairs.
func Mapping(n *yaml.Node, each func(key, val *yaml.Node), bad func(key *yaml.Node, duplicate bool, msg string)) {
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		switch {
		case key.Kind != yaml.ScalarNode:
			bad(key, false, "a key must be a plain string, got "+Kind(key))
			continue
		case key.ShortTag() == "!!merge":
			bad(key, false, "merge keys (<<) are not supported: write the values out")
			continue
		}
		if first, dup := seen[key.Value]; dup {
			bad(key, true, fmt.Sprintf("duplicate key (first at line %d)", first))
			continue
		}
		seen[key.Value] = key.Line
		each(key, val)
	}
}

// Kind names a node's kind for an error message ("want a mapping, got a
// list").
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a document"
	}
}
