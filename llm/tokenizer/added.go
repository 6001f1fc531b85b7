package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// trie finds added tokens leftmost-longest, as tokenizers' Aho-Corasick
// automaton with MatchKind::LeftmostLongest does
// (https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/tokenizer/added_vocabulary.rs).
type trie struct {
	root  *trieNode
	first [256]bool
}

type trieNode struct {
	next map[byte]*trieNode
	tok  *addedToken // token ending here, if any
}

func newTrie() *trie { return &trie{root: &trieNode{}} }

func (t *trie) add(pat string, tok *addedToken) {
	if pat == "" {
		return
	}
	n := t.root
	for i := 0; i < len(pat); i++ {
		if n.next == nil {
			n.next = make(map[byte]*trieNode)
		}
		c, ok := n.next[pat[i]]
		if !ok {
			c = &trieNode{}
			n.next[pat[i]] = c
		}
		n = c
	}
	if n.tok == nil { // the first token with this pattern wins
		n.tok = tok
	}
	t.first[pat[0]] = true
}

// longestAt returns the longest token matching s at i and its end.
func (t *trie) longestAt(s string, i int) (*addedToken, int) {
	if !t.first[s[i]] {
		return nil, 0
	}
	var best *addedToken
	end := 0
	n := t.root
	for j := i; j < len(s); j++ {
		n = n.next[s[j]]
		if n == nil {
			break
		}
		if n.tok != nil {
			best, end = n.tok, j+1
		}
	}
	return best, end
}

// segment is a piece of input text, or an added token already identified.
type segment struct {
	s     string
	id    int // -1: text
	first bool
}

// findMatches splits s around the added tokens found by t, applying
// single_word, lstrip and rstrip as AddedVocabulary::find_matches does.
func (t *trie) findMatches(s string, first bool, out []segment) []segment {
	start := 0
	for i := 0; i < len(s); {
		tok, stop := t.longestAt(s, i)
		if tok == nil {
			i++
			continue
		}
		a, b := i, stop
		i = stop
		if tok.SingleWord {
			if (a > 0 && endsWithWord(s[:a])) || (b < len(s) && startsWithWord(s[b:])) {
				continue
			}
		}
		if tok.LStrip {
			a = max(len(strings.TrimRightFunc(s[:a], unicode.IsSpace)), start)
		}
		if tok.RStrip {
			b = len(s) - len(strings.TrimLeftFunc(s[b:], unicode.IsSpace))
		}
		if start < a {
			out = append(out, segment{s: s[start:a], id: -1, first: first && start == 0})
		}
		out = append(out, segment{s: s[a:b], id: tok.ID})
		start = b
		if i < b {
			i = b
		}
	}
	if start < len(s) {
		out = append(out, segment{s: s[start:], id: -1, first: first && start == 0})
	}
	return out
}

// isRustWord is the regex crate's Unicode \w: Alphabetic, marks, decimal
// digits, connector punctuation and join controls.
func isRustWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isRustWord(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isRustWord(r)
}
