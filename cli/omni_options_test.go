package cli

import (
	"io"
	"strings"
	"testing"

	"switchyard/omni"
)

func TestOmniGroupChatsOption(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (*config, error) {
		return parseConfig("serve", args, func(k string) string { return env[k] }, io.Discard)
	}
	t.Run("group chats are ignored unless told otherwise", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(nil)
		if err != nil || cfg.OmniGroupChats != omni.GroupChatsIgnore {
			t.Fatalf("default %q, %v; want ignore", cfg.OmniGroupChats, err)
		}
	})
	t.Run("OMNI_GROUP_CHATS and --omni-group-chats admit them as threads, the flag winning", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(map[string]string{"OMNI_GROUP_CHATS": "thread"})
		if err != nil || cfg.OmniGroupChats != omni.GroupChatsThread {
			t.Fatalf("from the environment: %q, %v; want thread", cfg.OmniGroupChats, err)
		}
		cfg, err = parse(map[string]string{"OMNI_GROUP_CHATS": "thread"}, "--omni-group-chats", "ignore")
		if err != nil || cfg.OmniGroupChats != omni.GroupChatsIgnore {
			t.Fatalf("flag over environment: %q, %v; want ignore", cfg.OmniGroupChats, err)
		}
	})
	t.Run("any other value is refused at start, naming the option", func(t *testing.T) {
		t.Parallel()
		_, err := parse(map[string]string{"OMNI_GROUP_CHATS": "all"})
		if err == nil || !strings.Contains(err.Error(), "omni-group-chats (from OMNI_GROUP_CHATS): must be ignore or thread") {
			t.Fatalf("error %v", err)
		}
	})
}
