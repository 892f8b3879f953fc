# Installs gantry, builds tests/sdk_plugin against the installed SDK with
# find_package(gantry), and trains it with the installed runner.
# Args: BUILD_DIR SOURCE_DIR WORK_DIR Torch_DIR
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/gantry/gantry.hpp include/gantry/version.hpp include/gantry/core_export.hpp
          lib/cmake/gantry/gantryConfig.cmake lib/cmake/gantry/GantryPlugin.cmake lib/cmake/gantry/GantryPch.cmake bin/gantry
          lib/gantry/plugins/libgan.so)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()

# tests/sdk_plugin and the docs' two examples (docs/plugins.md), each a
# standalone project (project() + find_package(gantry)), built as
# subdirectories of one so that they share one precompiled <torch/torch.h>
# (each project of its own would build its own: ~20 s each here). No build
# type is given: the SDK defaults to Release and says so.
file(WRITE ${WORK_DIR}/plugins/CMakeLists.txt "cmake_minimum_required(VERSION 3.22)
project(out_of_tree LANGUAGES CXX)
add_subdirectory(${SOURCE_DIR}/tests/sdk_plugin tiny)
add_subdirectory(${SOURCE_DIR}/docs/examples/cgan cgan)
add_subdirectory(${SOURCE_DIR}/docs/examples/vae vae)
")
run(${CMAKE_COMMAND} -S ${WORK_DIR}/plugins -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix} -DTorch_DIR=${Torch_DIR})
if(NOT out MATCHES "gantry: CMAKE_BUILD_TYPE not set: Release")
  message(FATAL_ERROR "the SDK did not default to an optimised build:\n${out}")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
file(GLOB_RECURSE gch ${WORK_DIR}/build/*.gch)
list(FILTER gch INCLUDE REGEX "gantry_torch_pch")
if(NOT gch)
  message(FATAL_ERROR "the out-of-tree plugin was built without the SDK's precompiled <torch/torch.h>")
endif()

# The installed runner finds the installed GAN by name, and the new plugin by path.
run(${prefix}/bin/gantry plugins)
if(NOT out MATCHES "gan 0\\.1\\.0")
  message(FATAL_ERROR "installed gantry does not list the installed gan plugin:\n${out}")
endif()
run(${prefix}/bin/gantry train ${SOURCE_DIR}/tests/sdk_plugin/tiny.yaml
    system.plugin=${WORK_DIR}/build/tiny/libtiny.so trainer.out_dir=${WORK_DIR}/runs)
file(READ ${WORK_DIR}/runs/tiny/latest/metrics.csv csv)
string(REGEX MATCHALL "\n60,0,[0-9.]+,train,([0-9.]+)" last "${csv}")
if(NOT csv MATCHES "^step,epoch,wall_time,kind,loss\n" OR NOT last)
  message(FATAL_ERROR "metrics.csv of the out-of-tree plugin is not as expected:\n${csv}")
endif()
string(REGEX MATCH "\n10,0,[0-9.]+,train,([0-9.]+)" first "${csv}")
set(first_loss ${CMAKE_MATCH_1})
string(REGEX MATCH "\n60,0,[0-9.]+,train,([0-9.]+)" last "${csv}")
set(last_loss ${CMAKE_MATCH_1})
if(NOT last_loss LESS first_loss)
  message(FATAL_ERROR "the out-of-tree plugin did not learn: loss ${first_loss} at step 10, ${last_loss} at 60")
endif()
message(STATUS "out-of-tree plugin trained: loss ${first_loss} -> ${last_loss}")

# SDK 1.1 against the installed headers: the same plugin on data of its own
# (system.synthetic: no data files), with a cosine schedule, clipping and an
# EMA of its weights; 2 ranks stay bit-identical, and a run resumed from its
# step-20 checkpoint ends where the uninterrupted one does (the EMA weights
# that `gantry sample` draws with included: the tensors files are compared byte for byte).
set(v11 system.plugin=${WORK_DIR}/build/tiny/libtiny.so system.synthetic=true system.pixels=2
    data.path=/nonexistent data.batch_size=32 trainer.max_steps=40 checkpoint.every_n_steps=20
    optimizers.sgd.scheduler=cosine optimizers.sgd.warmup=5 optimizers.sgd.gradient_clip_val=0.5 ema.decay=0.9)
run(${prefix}/bin/gantry launch -n 2 ${SOURCE_DIR}/tests/sdk_plugin/tiny.yaml ${v11} trainer.out_dir=${WORK_DIR}/two)
if(NOT out MATCHES "replicas bit-identical across 2 ranks")
  message(FATAL_ERROR "SDK 1.1 plugin on 2 ranks:\n${out}")
endif()
run(${prefix}/bin/gantry train ${SOURCE_DIR}/tests/sdk_plugin/tiny.yaml ${v11} trainer.out_dir=${WORK_DIR}/a)
run(${prefix}/bin/gantry train ${SOURCE_DIR}/tests/sdk_plugin/tiny.yaml ${v11} trainer.out_dir=${WORK_DIR}/b
    trainer.resume=${WORK_DIR}/a/tiny/latest/checkpoints/step_0000020.ckpt)
foreach(r a b)
  run(${prefix}/bin/gantry sample -c ${WORK_DIR}/${r}/tiny/latest/checkpoints/step_0000040.ckpt -n 16
      --tensors ${WORK_DIR}/${r}.pt)
  if(NOT out MATCHES "sampling with the EMA weights")
    message(FATAL_ERROR "gantry sample did not use the EMA weights:\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/a.pt ${WORK_DIR}/b.pt RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "the resumed SDK 1.1 run ended elsewhere than the uninterrupted one")
endif()
file(READ ${WORK_DIR}/a/tiny/latest/metrics.csv csv11)
if(NOT csv11 MATCHES "lr-sgd")
  message(FATAL_ERROR "the schedule's lr is not logged:\n${csv11}")
endif()
message(STATUS "out-of-tree SDK 1.1 plugin: own data, cosine lr, clipping, EMA; 2 ranks identical, resume exact")

# The docs' examples train: the conditional GAN draws given classes
# (--labels, a class a column with --rows), the VAE validates every 20
# batches and at its end, with what its validation hooks log in the row.
set(ex trainer.log_every_n_steps=10 trainer.out_dir=${WORK_DIR}/examples)
run(${prefix}/bin/gantry train ${SOURCE_DIR}/docs/examples/cgan/cgan.yaml system.plugin=${WORK_DIR}/build/cgan/libcgan.so ${ex}
    trainer.max_steps=30)
run(${prefix}/bin/gantry sample -c ${WORK_DIR}/examples/cgan_fashion_mnist/latest/checkpoints/step_0000030.ckpt
    -n 20 --labels 0,1,2,3,4,5,6,7,8,9 --rows 2 -o ${WORK_DIR}/cgan.png)
if(NOT out MATCHES "wrote 20 samples")
  message(FATAL_ERROR "gantry sample --labels with the conditional GAN:\n${out}")
endif()
run(${prefix}/bin/gantry train ${SOURCE_DIR}/docs/examples/vae/vae.yaml system.plugin=${WORK_DIR}/build/vae/libvae.so
    ${ex} trainer.max_steps=50 trainer.val_every_n_steps=20)
file(STRINGS ${WORK_DIR}/examples/vae_fashion_mnist/latest/metrics.csv val REGEX ",val,")
list(LENGTH val n)
if(NOT n EQUAL 3 OR NOT out MATCHES "validation at step 50")
  message(FATAL_ERROR "the VAE example validated ${n} times (20, 40 and its end, 50):\n${val}\n${out}")
endif()
file(READ ${WORK_DIR}/examples/vae_fashion_mnist/latest/metrics.csv vae_csv)
if(NOT vae_csv MATCHES "val_active_units")
  message(FATAL_ERROR "the VAE's on_validation_end value is not in metrics.csv:\n${vae_csv}")
endif()
message(STATUS "docs/examples: cgan sampled by class, vae validated 3 times")
