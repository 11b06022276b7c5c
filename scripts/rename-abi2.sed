# libgguf 2 (soname libgguf.so.2): one constructor/destructor vocabulary
# (docs/conventions.md, "Constructors and destructors"). Re-run over code written
# against libgguf 1, e.g.
#   git grep -lzE 'gguf_(hasher_new|shard_plan_build|split_plan_make|import_map_(load|parse)|(file|set|kld|npy|record|st_file|st_set)_close|npy_(create_f32|append_f32|commit|free))' \
#     | xargs -0 sed -i -f scripts/rename-abi2.sed
# The npy writer lines must run before gguf_npy_close -> gguf_npy_free (this order).
s/\bgguf_hasher_new\b/gguf_hasher_create/g
s/\bgguf_shard_plan_build\b/gguf_shard_plan_create/g
s/\bgguf_split_plan_make\b/gguf_split_plan_create/g
s/\bgguf_import_map_load\b/gguf_import_map_open/g
s/\bgguf_import_map_parse\b/gguf_import_map_open_memory/g
s/\bgguf_npy_create_f32\b/gguf_npy_writer_create_f32/g
s/\bgguf_npy_append_f32\b/gguf_npy_writer_append_f32/g
s/\bgguf_npy_commit\b/gguf_npy_writer_commit/g
s/\bgguf_npy_free\b/gguf_npy_writer_free/g
s/\bgguf_npy_close\b/gguf_npy_free/g
s/\bgguf_file_close\b/gguf_file_free/g
s/\bgguf_set_close\b/gguf_set_free/g
s/\bgguf_kld_close\b/gguf_kld_free/g
s/\bgguf_record_close\b/gguf_record_free/g
s/\bgguf_st_file_close\b/gguf_st_file_free/g
s/\bgguf_st_set_close\b/gguf_st_set_free/g
