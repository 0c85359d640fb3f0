# sources of src/io: safetensors, config.json, .npy, token datasets, traces, metrics, model directories
librp_la_SOURCES += \
	src/io/config.h src/io/config.c src/io/config_save.c \
	src/io/quant_modules.c src/io/quant_modules.h \
	src/io/mxfp4.c src/io/mxfp4.h src/io/fp8.c src/io/fp8.h \
	src/io/atomic_file.c src/io/atomic_file.h src/io/file_set.c src/io/file_set.h \
	src/io/output_path.c src/io/output_path.h \
	src/io/read_file.c src/io/read_file.h \
	src/io/json_util.c src/io/json_util.h \
	src/io/safetensors_header.c src/io/safetensors_header.h \
	src/io/safetensors.c src/io/safetensors.h \
	src/io/safetensors_set.c src/io/safetensors_set.h \
	src/io/expert_layout.c src/io/expert_layout.h src/io/name_index.c src/io/name_index.h \
	src/io/gpt_oss_experts.c src/io/gpt_oss_experts.h \
	src/io/saved_tensors.c src/io/saved_tensors.h \
	src/io/safetensors_writer.c src/io/safetensors_writer.h \
	src/io/npy.c src/io/npy.h src/io/npy_check.c src/io/npy_write.c \
	src/io/config_lora.c src/io/config_lora.h src/io/peft.c src/io/peft.h \
	src/io/dataset.c src/io/dataset.h src/io/trace.c src/io/trace.h \
	src/io/metrics.c src/io/metrics.h src/io/model_dir.c src/io/model_dir.h \
	src/io/checkpoint.c src/io/checkpoint.h \
	src/io/checkpoint_lock.c src/io/checkpoint_lock.h \
	src/io/companions.c src/io/companions.h
